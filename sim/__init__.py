"""Simulations behind the guide's figures: pure Python + numpy, no UI, no torch.

Every module here runs unchanged in CPython 3.11/3.12 and in the browser on Pyodide.
"""
