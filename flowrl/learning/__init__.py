"""What acts and what learns: acting modules and models, distributions, policies (the
acting side a worker holds), learners (loss, optimisers, the SGD loop), shared loss
terms, postprocessing and normalisation. Imports the core and replay layers only."""
