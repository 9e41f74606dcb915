"""Clients of the socket protocol, and the conformance suite every one of them passes
(clients/conformance, docs/clients.md). The Python client itself is the ``client`` package."""
