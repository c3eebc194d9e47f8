/* busbw of Open MPI collectives (shared memory on one host), in nccl-tests' terms, for
 * comparison with distrun's bench step. Build: mpicc -O2 -o mpi_bench mpi_bench.c
 * Usage: mpirun -np N mpi_bench COLLECTIVES SIZES ITERS WARMUP [COLLECTIVES SIZES ITERS WARMUP]...
 *   COLLECTIVES: comma list of all_reduce,all_gather,all_to_all,broadcast,reduce_scatter
 *   SIZES: comma list of byte counts with K/M/G suffixes (powers of 1024)
 *   each group of four in turn, in one job: mpirun's start costs about a second
 * Prints on rank 0 one JSON object per (collective, size), as torch_bench.py does. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long parse_size(const char* s) {
  char* end;
  long v = strtol(s, &end, 10);
  if (*end == 'K') v <<= 10;
  if (*end == 'M') v <<= 20;
  if (*end == 'G') v <<= 30;
  return v;
}

static double factor(const char* c, int n) {
  if (!strcmp(c, "all_reduce")) return 2.0 * (n - 1) / n;
  if (!strcmp(c, "broadcast")) return 1.0;
  return (double)(n - 1) / n;
}

static void run(const char* c, float* a, float* b, long count, int n) {
  if (!strcmp(c, "all_reduce"))
    MPI_Allreduce(MPI_IN_PLACE, a, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  else if (!strcmp(c, "broadcast"))
    MPI_Bcast(a, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
  else if (!strcmp(c, "all_gather"))
    MPI_Allgather(a, (int)(count / n), MPI_FLOAT, b, (int)(count / n), MPI_FLOAT, MPI_COMM_WORLD);
  else if (!strcmp(c, "all_to_all"))
    MPI_Alltoall(a, (int)(count / n), MPI_FLOAT, b, (int)(count / n), MPI_FLOAT, MPI_COMM_WORLD);
  else if (!strcmp(c, "reduce_scatter"))
    MPI_Reduce_scatter_block(a, b, (int)(count / n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  else {
    fprintf(stderr, "unknown collective %s\n", c);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (argc < 5 || (argc - 1) % 4) {
    if (rank == 0)
      fprintf(stderr, "usage: mpi_bench COLLECTIVES SIZES ITERS WARMUP [COLLECTIVES SIZES ITERS WARMUP]...\n");
    MPI_Finalize();
    return 2;
  }
  for (char** group = argv + 1; group < argv + argc; group += 4) {
    int iters = atoi(group[2]), warmup = atoi(group[3]);
    char* colls = strdup(group[0]);
    for (char* c = strtok(colls, ","); c; c = strtok(NULL, ",")) {
      char* sizes = strdup(group[1]);
      char* save = NULL;
      for (char* s = strtok_r(sizes, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
        long bytes = parse_size(s), count = bytes / 4;
        float* a = malloc(bytes);
        float* b = malloc(bytes);
        for (long i = 0; i < count; ++i) a[i] = 1.0f;
        for (int i = 0; i < warmup; ++i) run(c, a, b, count, n);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; ++i) run(c, a, b, count, n);
        double mean = (MPI_Wtime() - t0) / iters, slowest;
        MPI_Allreduce(&mean, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (rank == 0)
          printf(
              "{\"system\": \"mpi\", \"collective\": \"%s\", \"bytes\": %ld, \"world_size\": %d, \"time_us\": %.3f, "
              "\"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f}\n",
              c, bytes, n, slowest * 1e6, bytes / slowest / 1e9, bytes / slowest / 1e9 * factor(c, n));
        fflush(stdout);
        free(a);
        free(b);
      }
      free(sizes);
    }
    free(colls);
  }
  MPI_Finalize();
  return 0;
}
