"""The community's interop suite (logos-messaging/logos-delivery-interop-tests) without docker:
a pytest plugin that starts the suite's nodes as local processes (local_nodes.py) and a runner
(run.py). README.md says how to fetch the suite and run it."""
