"""`python -m toolwire` runs the command line."""

from toolwire.cli import main

main()
