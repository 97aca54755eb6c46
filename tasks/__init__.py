"""Tasks: each module is one problem. See tasks/base.py for the protocols and
tasks/registry.py for the list."""
