"""The `rsm` command line: one module per subcommand, each exposing ``register(subparsers)``."""
