"""The schema's registry: what each target adds to the blueprint, by its `type`. The blueprint
model is assembled from these, so this imports only the targets' schema modules (no compile,
stack or reaper code). A new target adds one line here, and one in compile's and in the
running world's registries."""

from __future__ import annotations

from rackform.blueprint.targets.aws.schema import SCHEMA as AWS
from rackform.blueprint.targets.bare_metal.schema import SCHEMA as BARE_METAL
from rackform.blueprint.targets.colocation.schema import SCHEMA as COLOCATION
from rackform.blueprint.targets.schema import TargetSchema

SCHEMAS: dict[str, TargetSchema] = {s.type: s for s in (AWS, BARE_METAL, COLOCATION)}
