/* One-time initialisation, and the fork() handlers that modules registered. */
#define _GNU_SOURCE
#include "init.h"

#include <assert.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>

#include "error.h"

#define MAX_STEPS 4

/* Written while the library loads, before any thread can call kvik__init(); read-only after. */
static const kvik__fork_handlers *fork_slots[KVIK__FORK_SLOTS];
static kvik__init_step *steps[MAX_STEPS];
static size_t nsteps;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int init_result;
static char init_message[KVIK_MESSAGE_MAX];

void kvik__atfork_register(kvik__fork_slot slot, const kvik__fork_handlers *handlers) {
  assert(slot < KVIK__FORK_SLOTS && !fork_slots[slot]);
  fork_slots[slot] = handlers;
}

void kvik__init_register(kvik__init_step *step) {
  assert(nsteps < MAX_STEPS);
  steps[nsteps++] = step;
}

static void prepare(void) {
  for (int i = KVIK__FORK_SLOTS - 1; i >= 0; i--)
    if (fork_slots[i] && fork_slots[i]->prepare) fork_slots[i]->prepare();
}

static void parent(void) {
  for (int i = 0; i < KVIK__FORK_SLOTS; i++)
    if (fork_slots[i] && fork_slots[i]->parent) fork_slots[i]->parent();
}

static void child(void) {
  for (int i = 0; i < KVIK__FORK_SLOTS; i++)
    if (fork_slots[i] && fork_slots[i]->child) fork_slots[i]->child();
}

static void initialise(void) {
  pthread_atfork(prepare, parent, child);
  for (size_t i = 0; i < nsteps && init_result == 0; i++) init_result = steps[i]();
  if (init_result < 0) snprintf(init_message, sizeof init_message, "%s", kvik_last_error());
}

int kvik__init(void) {
  pthread_once(&once, initialise);
  if (init_result < 0) kvik__set_message(init_message);
  return init_result;
}
