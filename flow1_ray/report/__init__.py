"""Reports: a set of events with a verdict (:class:`.model.Report`), as JSON, Markdown, HTML,
a console view and the live panel."""
