"""omni-host: audit and remediate on-prem LLM inference hosts."""

__version__ = "0.1.0"
