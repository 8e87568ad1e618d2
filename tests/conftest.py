"""Root conftest of the plugin's own tests: pytester drives the plugin in subprocesses."""

pytest_plugins = ["pytester"]
