// A reader for gzip'd tar archives, just enough for the CIFAR-10 archive:
// ustar / GNU tar headers with their checksums, GNU long names and pax
// headers. Only regular files whose base name is asked for are written, and
// only under their base name, so an archive cannot write outside dest_dir.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace elastic::trainer {

// Writes every regular file of `archive` whose base name `want` accepts to
// dest_dir/<base name> (fsync'd). Returns the base names written, in archive
// order. Throws std::runtime_error naming the archive and the byte offset (in
// the decompressed tar stream) on a bad header, a checksum mismatch or a
// truncated archive.
std::vector<std::string> ExtractTarGz(const std::string& archive, const std::string& dest_dir,
                                      const std::function<bool(const std::string&)>& want);

}  // namespace elastic::trainer
