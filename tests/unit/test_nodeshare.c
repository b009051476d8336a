/* The node's share of the ring directory's file system (events/nodeshare.h): the decision
 * from the numbers, and the local ranks from the launcher's variables. */
#include <CUnit/Basic.h>
#include <stdint.h>
#include <stdlib.h>

#include "events/nodeshare.h"
#include "wd_test_util.h"

#define MiB (1ull << 20)

static void test_container_shm(void) {
  /* Docker's default: 64 MiB, 8 local ranks: 8 MiB for the plugin on the node, 1 each. */
  CU_ASSERT_FALSE(wd_nodeshare_decide(64 * MiB, 64 * MiB, 0, 0, 8, 1310 * 1024, 1)); /* full rings */
  CU_ASSERT_TRUE(wd_nodeshare_decide(64 * MiB, 64 * MiB, 0, 0, 8, 512 * 1024, 1));
  CU_ASSERT_FALSE(wd_nodeshare_decide(64 * MiB, 64 * MiB, 0, 512 * 1024, 8, 600 * 1024, 1)); /* its part */
  /* The node's part is taken by others (or leftovers). */
  CU_ASSERT_FALSE(wd_nodeshare_decide(64 * MiB, 56 * MiB, 8 * MiB, 0, 8, 64 * 1024, 1));
}

static void test_half_free(void) {
  /* A big /dev/shm already half used (NCCL's segments, other jobs): nothing more. */
  CU_ASSERT_FALSE(wd_nodeshare_decide(1024 * MiB, 512 * MiB, 0, 0, 1, 2 * MiB, 1));
  CU_ASSERT_TRUE(wd_nodeshare_decide(1024 * MiB, 600 * MiB, 0, 0, 1, 2 * MiB, 1));
  /* More than is free never fits. */
  CU_ASSERT_FALSE(wd_nodeshare_decide(1024 * MiB, 1 * MiB, 0, 0, 1, 2 * MiB, 1));
}

static void test_disk(void) {
  /* A ring directory on a disk leaves only its last twentieth alone. */
  CU_ASSERT_TRUE(wd_nodeshare_decide(100 * MiB, 50 * MiB, 90 * MiB, 90 * MiB, 8, 40 * MiB, 0));
  CU_ASSERT_FALSE(wd_nodeshare_decide(100 * MiB, 50 * MiB, 0, 0, 8, 46 * MiB, 0));
  /* A file system that says nothing: the creation tells. */
  CU_ASSERT_TRUE(wd_nodeshare_decide(0, 0, 0, 0, 8, 1 * MiB, 1));
}

static void test_local_ranks(void) {
  unsetenv("LOCAL_WORLD_SIZE");
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  setenv("SLURM_NTASKS_PER_NODE", "4(x2)", 1);
  CU_ASSERT_EQUAL(wd_nodeshare_local_ranks("/nonexistent"), 4);
  setenv("LOCAL_WORLD_SIZE", "8", 1);
  CU_ASSERT_EQUAL(wd_nodeshare_local_ranks("/nonexistent"), 8);
  unsetenv("LOCAL_WORLD_SIZE");
  unsetenv("SLURM_NTASKS_PER_NODE");
  CU_ASSERT_EQUAL(wd_nodeshare_local_ranks("/nonexistent"), 1); /* this process alone */
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  CU_pSuite s = CU_add_suite("nodeshare", NULL, NULL);
  CU_add_test(s, "a container's 64 MiB /dev/shm and 8 local ranks", test_container_shm);
  CU_add_test(s, "half of a memory file system stays free", test_half_free);
  CU_add_test(s, "a ring directory on a disk", test_disk);
  CU_add_test(s, "local ranks from the launcher", test_local_ranks);
  return wd_test_run();
}
