"""tito: the TinyTorch course command line (export, test, status, reset, release, doctor)."""
