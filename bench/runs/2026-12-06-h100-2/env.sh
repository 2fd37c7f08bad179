# sourced by the device scripts: MLX CUDA (unpacked by device-2.sh) and the machine's NVIDIA
# libraries ahead of the binaries' own libraries (OpenBLAS, gfortran).
nv=$(python3 -c "import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))")/nvidia
export LD_LIBRARY_PATH=/opt/mlxcu/mlx/lib:/opt/mlxcu/mlx_cuda_13.libs:/root/bin/lib:$nv/cu13/lib:$nv/cudnn/lib:$nv/nccl/lib
export GMLX_CACHE_DIR=/root/cache PATH=/usr/local/cuda/bin:$PATH
# MLX compiles its CUDA kernels at run time (NVRTC) and keeps them here for the next process
export MLX_PTX_CACHE_DIR=/root/ptx
