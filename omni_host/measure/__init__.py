"""The measuring side: how a run on the host is judged. The bench and its Sentinel verdict
(``bench``), a knob's A/B (``knob``), the split sweep (``sweep``), the ceilings a run is read
against (``ceiling``), the placement plan and its proof (``placement``, ``plan``), the served
rate and the live watch (``serve``, ``watch``), twins across a fleet (``twins``), and what a
run's numbers are comparable by (``context``). Below ``evaluate``: the registered checks call
these judges; nothing here imports a check, the facts or the registry."""
