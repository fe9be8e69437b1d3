"""The command line: the dispatcher (`cli.py`), the `accelerate launch -m` entries of the training commands and the
demo, and the command table they read (`registry.py`, which `tisa-hf sweep` reads too; nothing else in the
package imports this folder); light, so that `tisa-hf --help` imports no torch."""
