// Programmatic dependent launch (sm_90 and later): a kernel launched as a
// programmatic dependent of the one before it on the stream may be
// scheduled while that one finishes, and must wait for it before it touches
// global memory; a kernel may let its own dependents be scheduled early.
// Both are no-ops where the launch was an ordinary one, and before sm_90.

// Wait until the kernel before this one has finished and its writes are
// visible. Every kernel the host launches as a dependent calls this before
// its first global load or store.
__device__ __forceinline__ void after_previous()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Let the next kernel's blocks be scheduled now (they wait in
// after_previous until this kernel has finished).
__device__ __forceinline__ void let_next_start()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

