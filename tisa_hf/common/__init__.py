"""The pieces several commands share, below every command: the machine and library versions, checks of files and
of the Hub, what a checkpoint can read and how its table is stretched, text reading, sentence-transformers folders
and their cards, paired bootstrap intervals, Markdown tables and resumable result files. Nothing here imports a
command."""
