"""loadgen: async load testing for LLM serving, baseline vs speculative decoding."""

__version__ = "0.1.0"
