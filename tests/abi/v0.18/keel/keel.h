/* Everything of the Keel C ABI in one include. */
#ifndef KEEL_KEEL_H
#define KEEL_KEEL_H
#include "keel/version.h"
#include "keel/types.h"
#include "keel/params.h"
#include "keel/host.h"
#include "keel/plugin.h"
#include "keel/backend.h"
#include "keel/model.h"
#include "keel/optimizer.h"
#include "keel/strategy.h"
#include "keel/data.h"
#include "keel/comm.h"
#include "keel/schedule.h"
#include "keel/offload.h"
#include "keel/embed.h"
#endif
