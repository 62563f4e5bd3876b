// `keel schedule-check NAME --pp P --microbatches M [--virtual-stages V]`: a schedule plugin's
// action lists for every stage, built through its table and run through the all-rank simulator
// the core runs at start-up, with every problem listed (or, when none, the activations each
// stage holds and the unit-time bubble). For schedule authors, before a run would refuse them.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace keel {

extern const char* const kScheduleCheckUsage;  // `keel schedule-check --help`

// args: what follows `keel schedule-check`. Returns the exit status: 0 when the lists can run,
// 1 when they cannot (every problem printed to out) or the plugin cannot be loaded or refuses
// the shape, 2 for a misused command line. Messages go to err.
int schedule_check_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace keel
