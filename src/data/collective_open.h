// Private to data: what the loaders' collective opens share.
#pragma once

#include <string>

namespace meridian::comm {
class Runtime;
}

namespace meridian::data {

// Collective over the world, after every rank opened `path` (agreed): every rank passes the
// fingerprint of what it opened (16 hex digits, DatasetReader::fingerprint or the text loader's).
// Returns when every rank's equals rank 0's; otherwise a UserError on every rank naming the first
// rank that differs, rank 0 and their hosts.
void require_same_dataset(const comm::Runtime& runtime, const std::string& path, const std::string& fingerprint);

}  // namespace meridian::data
