"""What the framework adapters share: numbered item folders and planned commits
(``items.py``), the named AutoGen memory (``memory.py``), tiered memory
(``tiered.py``) and the history tools an agent can call (``history_tools.py``).

The public adapter modules sit above this folder: ``memrev.autogen``,
``memrev.ag2``, ``memrev.openai_agents``."""
