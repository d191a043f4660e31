"""`python -m torchdali.bench`: see the package's docstring."""
from . import main

main()
