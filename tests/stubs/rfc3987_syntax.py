"""A stand-in for rfc3987-syntax in the suite's processes (``tests/conftest.py`` puts this
folder first on their path). The real package compiles about 30 Earley parsers when
imported (0.9 s of CPU here), and jsonschema imports it with Ray, in every process that
imports Ray: each Ray worker and each command the suite runs. Nothing in the suite checks
IRIs, and jsonschema takes this ImportError as the package not being installed."""

raise ImportError("rfc3987_syntax is left out of the test suite's processes (tests/conftest.py)")
