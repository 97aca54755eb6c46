"""`coevolve dashboard`: a local, read-only web view of run and comparison
directories that follows runs while they are written.

- `reader`: what a directory holds (heuristic run, agent run, comparison),
  read with the run store's torn-line rule; never writes.
- `app`: the Starlette application (JSON API + one static page) and the
  uvicorn server; the page draws its charts with the plotly.js that the
  `plotly` package ships, so nothing is fetched from the network.
"""
