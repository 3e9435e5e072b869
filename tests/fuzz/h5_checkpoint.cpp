// A checkpoint file (--resume, --model, export): the resume point with every checksum verified,
// the saved config through the schema, every tensor read. Seeds are small valid checkpoints; the
// fuzzer mutates their bytes.
#include "fuzz.h"
#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/tasks/registry.h"

using namespace meridian;

MERIDIAN_FUZZ_TARGET(h5_checkpoint) {
  const std::string path = fuzz::write("step_00000002.h5", bytes);
  if (!ckpt::is_checkpoint(path)) return;
  const ckpt::ResumePoint point = ckpt::read_resume_point(path, true);
  const ckpt::Reader reader(path);
  Config config = ckpt::saved_config(reader);
  tasks::validate_config(config);
  for (const auto& name : reader.names()) {
    const auto shape = reader.shape(name);
    if (!shape.empty() && shape[0] > 0) reader.read_rows(name, 0, 1);
    reader.read(name);  // bounded by the file: its checksums are read with it
  }
}
