"""Golden files: recorded requests, engine replies and client bytes per dialect (see README.md)."""
