"""`python -m broker.cli`: the same as the `gpufed` console script."""

from broker.cli import main

main()
