"""The browser tier: real JupyterLab + Chromium (deselect with ``-m "not browser"``)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: drives JupyterLab in Debian's Chromium")
