"""The command line: the dispatcher (`cli.py`), the `accelerate launch -m` entries of the training commands and the
demo. Nothing in the package imports this folder; light, so that `tisa-hf --help` imports no torch."""
