"""Command-line tools: ``python -m bagua.script.baguarun`` (upstream's baguarun, run by
bagua-launch over ssh)."""
