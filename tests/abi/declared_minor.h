/* What the two compatibility plugins (frozen_sgd.c, frozen_strategy.c) declare and pass, built
   one of two ways. With -DKEEL_DECLARED_MINOR=N and today's headers, the plugin poses as one
   built against 0.N: it declares that minor and passes that release's struct sizes
   (KEEL_*_SIZE(N)), as a binary built then does. Without it, against the frozen 0.18 copy alone
   (tests/abi/v0.18), it declares its headers' minor and passes their sizeof. */
#ifndef KEEL_COMPAT_DECLARED_MINOR_H
#define KEEL_COMPAT_DECLARED_MINOR_H

#include <keel/keel.h>

#ifdef KEEL_DECLARED_MINOR
#define PLUGIN_MINOR KEEL_DECLARED_MINOR
#define RELEASED_SIZE(NAME, type) KEEL_##NAME##_SIZE(KEEL_DECLARED_MINOR)
#else
#define PLUGIN_MINOR KEEL_ABI_VERSION_MINOR
#define RELEASED_SIZE(NAME, type) sizeof(type)
#endif

#endif
