"""The conformance suite: scenarios as data, the runner that plays them against each client
through its adapter, a real fleet and a scripted server (docs/clients.md, "Conformance")."""
