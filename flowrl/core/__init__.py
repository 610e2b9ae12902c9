"""The dataflow core: iterators (LocalIterator, ParallelIterator), the plan context,
SampleBatch, and Config. It imports nothing else of flowrl."""
