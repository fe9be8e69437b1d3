"""Retrieval over the embedding systems: the read-outs' scorers, and the commands that rank documents for
queries."""
