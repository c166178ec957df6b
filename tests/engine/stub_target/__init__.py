"""A target that exists only in the tests: rented "stub" machines of one flavor per node group.
It is laid out as a real target is (schema, compile and runtime parts, each importing only its
own layer and those below, and its reaper; a real target's are a package in each layer), so `test_new_target.py` can show what adding a target takes. Its
machines' live state is the stub cloud (`cloud.py`), a JSON file the test writes."""
