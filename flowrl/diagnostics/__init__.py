"""Looking at a plan: its operator graph, the profiler, and the automatic layout
(``num_workers="auto"``)."""
