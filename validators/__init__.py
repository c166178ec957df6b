"""Jobs shipped to the nodes and run there: the smoke-training job (`validators.smoke`, run with
torchrun) and the host checks (`validators.hostcheck`). They import only torch and the Python
standard library (nvidia-ml-py where it is importable), never rackform: rackform passes every
expectation and threshold in as arguments."""
