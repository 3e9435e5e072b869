// Private to ckpt: the whole-file checksum of a checkpoint (seal.cpp; docs/formats.md, "Checkpoint
// format v1"). HDF5 validates little of its own metadata, and a damaged link table can corrupt the
// heap of the process that lists it (HDF5 1.10's H5G__link_release_table; issue 73), so no HDF5 call
// may touch a file before its bytes are known to be the ones written.
//
// A checkpoint file begins with an HDF5 user block of kSealBytes (H5Pset_userblock: HDF5, h5ls and
// h5py skip it and read the file as usual). After the file is closed, seal_file() writes there, as
// text padded with NULs:
//
//   meridian-checkpoint-checksum 1
//   bytes <the file's size>
//   chunk <bytes per chunk>
//   crc32c <hex> <hex> ...        one CRC-32C per chunk of the bytes after the user block
//   end <hex>                     CRC-32C of the lines above
//
// The chunks are split over the ranks, each checksums its own (reading through ckpt::Files), so the
// cost is a read of the file divided by the ranks.
#pragma once

#include <cstdint>
#include <string>

namespace meridian::comm {
class Runtime;
class OwnComm;
}  // namespace meridian::comm

namespace meridian::ckpt {

inline constexpr uint64_t kSealBytes = 4096;  // the user block that holds the checksum

// Collective over `own` (null: the world), after the Writer closed `path` (created with the user
// block): every rank checksums its chunks, rank 0 writes the header and fsyncs the file. A failure on
// any rank is a SystemError on every rank. Returns the seconds it took (this rank).
double seal_file(const comm::Runtime& rt, const comm::OwnComm* own, const std::string& path);

// What check_seal found.
enum class Seal {
  Verified,  // the header's checksums match every byte
  Unsealed,  // a plain HDF5 file (the signature at byte 0): written before checksums, not verified
  Skipped,   // set_verify_checksums(false)
};
// Not collective; before any HDF5 call on `path`. DataError "<path>: checksum: ..." when the file
// is neither a sealed checkpoint nor a plain HDF5 file, or when a chunk, the size or the header does
// not match. A file verified before in this process (the same inode, size and modification time) is
// not read again. Logs (once per file per process) that an unsealed file was not verified.
Seal check_seal(const std::string& path);
// The same, collective over the world: each rank checks its share of the chunks (as seal_file
// wrote them; a rank that verified the whole file before, as rank 0 does when it chooses the resume
// point, reads nothing), the outcome agreed; then no rank's Reader reads the file for it again. A mismatch is
// a DataError on the rank that found it and a UserError with its message on the others.
Seal check_seal(const comm::Runtime& rt, const std::string& path);

// Not collective: whether `path` begins as a checkpoint file does, with the checksum header or (from
// before checksums) the HDF5 signature; false when it is missing, unreadable or under 8 bytes.
bool starts_as_checkpoint(const std::string& path);

}  // namespace meridian::ckpt
