"""A run's findings read as one diagnosis (:func:`.diagnose.diagnose`): the primary symptom,
the findings that follow from it, its causes ranked by the run's own evidence (:mod:`.causes`,
:mod:`.stages`), and the change to make (:mod:`.change`)."""
