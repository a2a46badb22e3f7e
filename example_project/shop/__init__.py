"""The example domain: a small online shop whose orders run as pgflow workflows."""
