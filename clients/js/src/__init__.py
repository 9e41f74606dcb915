"""The JS client's module (an npm package: clients/js/package.json). Installed with the gateway as
the package ``gateway.jsclient`` (pyproject.toml maps it to this directory) so
``importlib.resources`` finds it in a wheel and in an editable install alike: the gateway serves
``client.js`` at ``/client.js`` for the page and for browsers' apps."""
