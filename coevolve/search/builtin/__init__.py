"""The built-in search methods, one file each (registered in coevolve/search/methods.py's BUILTIN)."""
