"""Passages that need their document: a WikiText task where a window is named only outside itself, and training that
rewards reading the whole document (`tisa-hf context-passages`, `tisa-hf context-train`)."""
