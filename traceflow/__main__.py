"""`python -m traceflow`: the command."""
from traceflow.cli import main

if __name__ == "__main__":
    main()
