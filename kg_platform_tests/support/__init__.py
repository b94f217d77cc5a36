"""What tests and benchmarks share: helpers that are not tests themselves. Nothing here
imports a ``test_*`` module (the dependency goes one way: tests and benchmarks import
support)."""
