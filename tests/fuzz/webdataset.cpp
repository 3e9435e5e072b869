// A webdataset tar shard (prep image-text --webdataset): every sample's captions and its image
// member decoded as prep decodes it.
#include "../../src/data/webdataset.h"

#include "../../src/data/image_decode.h"
#include "fuzz.h"

using namespace meridian;

MERIDIAN_FUZZ_TARGET(webdataset) {
  const std::string path = fuzz::write("shard-000000.tar", bytes);
  try {
    data::ShardReader reader(path);
    data::WdsSample sample;
    while (reader.next(sample)) {
      data::sample_captions(sample);
      const std::string ext = data::image_member(sample);
      if (!ext.empty()) try {
          data::decode_rgb(sample.members.at(ext), sample.key + "." + ext);
        } catch (const data::SkipImage&) {
        }
    }
  } catch (const data::SkipImage&) {
  }
}
