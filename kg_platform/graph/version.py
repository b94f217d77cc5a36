"""The graph build's format number, importable without numpy (the graph asset's code version
is read when the definitions load)."""

# bump when the meaning of an array changes: the build id then changes with it
# (2: the title store, TITLE_ARRAYS)
GRAPH_FORMAT = 2
