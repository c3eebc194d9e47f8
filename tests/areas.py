"""The test areas: the first part of every ctest name, and a label each test carries
(label_check.py enforces both; docs_test.py recognises the test names the docs cite by them)."""
AREAS = ("unit", "scenario", "launcher", "nccl", "faults", "fuzz", "package", "oracle", "bench", "suite", "store")
