"""Datasets and per-rank loaders."""
