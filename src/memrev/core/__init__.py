"""The pure core: objects, trees, deltas, text diff. Imports neither AG2 nor AutoGen."""
