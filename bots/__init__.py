"""The persona runtime: persona files, LLM providers and the loop that decides, claims, generates and speaks.

``bots`` talks to the arbiter only through its HTTP API and the wire models in ``arbiter.contract``.
"""
