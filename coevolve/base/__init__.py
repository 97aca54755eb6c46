"""The bottom layer: errors, durable files, config sections shared by every
other layer. Nothing here imports from the rest of coevolve."""
