"""Operator pairs the executor runs as one step, planned at build time.

`decoders.image` followed by `random_resized_crop` (as DALI users write Inception-style
training, next to the fused `decoders.image_random_crop`) becomes one step that decodes
each JPEG only within its random window and the filter's margin, then resizes it
(operators/decoder_crops.decode_resized_crops). The pair fuses where the crop is the
decoder's only reader, both run in one stage ('cpu' and 'cpu', or 'mixed' and 'gpu'),
neither is inside a conditional branch, and the crop's arguments are constants, its filters
not nearest neighbour (whose rounding an offset window may tip to the next pixel). The crop's
step then passes the fused result on and moves to the decoder's stage, so that its random
generator is saved with the stage that draws from it (checkpoints); what it passes on may be
finished in the GPU stage, as the decoder's output may (RunContext.finish_later)."""
import collections

from .operators.decoder_crops import decode_resized_crops

_STAGES = {("cpu", "cpu"), ("mixed", "gpu")}


def fuse_steps(steps, outputs):
    """Rewire the fusable pairs of `steps` (planned Executor steps, in order) in place;
    `outputs`: the (node id, index) pairs the pipeline returns."""
    readers = collections.Counter(outputs)
    for step in steps:
        readers.update(step.inputs)
        readers.update(step.arg_inputs.values())
    by_id = {s.node.id: s for s in steps}
    for crop in steps:
        if (crop.node.schema.name != "random_resized_crop" or crop.arg_inputs or crop.node.in_branch
                or not crop.impl.smooth):
            continue
        source = crop.inputs[0]
        decoder = by_id.get(source[0])
        if (decoder is None or decoder.node.schema.name != "decoders.image" or decoder.node.in_branch
                or readers[source] != 1 or (decoder.node.device, crop.node.device) not in _STAGES):
            continue
        decoder.run = _fused(decoder.impl, crop.impl)
        crop.run = _passed_on
        crop.passes_on = True
        crop.stage = decoder.stage


def _fused(decoder, crop):
    def run(inputs, args, ctx):
        return [decode_resized_crops(decoder, crop, inputs[0], args, ctx)]
    return run


def _passed_on(inputs, args, ctx):
    return [inputs[0]]
