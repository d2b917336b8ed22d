"""tito: the TinyTorch course command line (export, test, status, reset, release, doctor)."""
import sys

# jupytext and nbdev import nbformat, which imports jsonschema, which imports the optional
# rfc3987_syntax when it is installed (JupyterLab's dependencies install it). That package
# compiles its IRI grammar at import time: more than a second for every tito command, for
# jsonschema's "iri" format check, which no notebook schema uses. A None in sys.modules makes
# that import fail, and jsonschema then leaves that one check out (python-jsonschema/jsonschema
# issue 1428). Only tito's own process is affected, never a student's kernel.
sys.modules.setdefault("rfc3987_syntax", None)
