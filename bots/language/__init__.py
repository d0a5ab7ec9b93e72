"""What the persona runtime and the offline stand-in both read in a line: its kind (a greeting, a question...) and
whether it may be posted (no pings, within its tier, not a repeat). A leaf: it imports nothing else of ``bots``, so
the provider library (``bots.llm``) can use it without importing the runtime."""
