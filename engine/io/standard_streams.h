// Descriptors 0, 1 and 2 held open, so that no file ptrain opens becomes one of them: with
// stderr closed (`ptrain run job.yaml 2>&-`) the metrics file would get descriptor 2 and every
// console line would go into it; the launcher's dup2 onto a worker's 0-2 would clobber a
// descriptor it still needs.
#pragma once

namespace ptrain::io {

// Reopens each closed standard descriptor on /dev/null (read-only for 0, write-only for 1 and 2).
// Call before anything opens a file.
void ensure_stdio_open();

}  // namespace ptrain::io
